"""MuJoCo tasks batched in C threads (`mujoco.batch`), equal to Gymnasium's v5, step for step."""
