"""Networks of BatchPPO: action distributions, feed-forward and recurrent policies, values."""
