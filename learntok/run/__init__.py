"""A training run's services: its config, checkpoints, folder, tracking, the rate dial, labels of figures, done markers, plots, processes."""
