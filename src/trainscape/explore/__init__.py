"""Design-space exploration: exhaustive sweep, evolutionary and beam search, the explore job."""
