"""The registry: customers, endpoints, subscriptions and the snapshot the pipelines match against."""
