"""What the notebooks teach with: the tiny model, serving, the speculative demo, workshop checks, tour."""
