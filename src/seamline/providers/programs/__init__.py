"""What every backend that runs a program shares: finding it, starting it inside the
envelope, its runtime folder, keeping it warm, the edit journal of its turns, and what
it is told so that its own configuration cannot decide what seamline is asked."""
