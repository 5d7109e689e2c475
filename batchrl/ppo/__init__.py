"""PPO: the seed's KL-penalty BatchPPO and the clipped variant, on one infrastructure."""
