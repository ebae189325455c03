"""GPU chargeback: who held the fleet's GPUs over a window, how much of that they used, and what the
idle part cost (``gpu-analyzer chargeback``; docs/chargeback.md)."""
