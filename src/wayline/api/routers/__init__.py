"""One router per API resource."""
