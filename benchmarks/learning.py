"""Learning curves of presets over seeds: the sweep, printing one JSON line a run.

The same as `python -m batchrl.scripts.sweep` (see its docstring): each (config, seed) is
a run folder under --logdir, trained to its budget by the train command; finished runs
are skipped and interrupted ones resumed when the command runs again. The MuJoCo presets
take minutes to hours on 2 cores; --steps sets a smaller budget.

    python benchmarks/learning.py --logdir runs/sweep --configs cheetah_clipped --seeds 0 1 2
"""

from __future__ import annotations

import sys

from batchrl.scripts import sweep

if __name__ == "__main__":
    sys.exit(sweep.main())
