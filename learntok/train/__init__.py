"""Training: the loop, its periodic reports, the memory and speed plan."""
