"""What every part shares: the event envelope, settings and errors."""
