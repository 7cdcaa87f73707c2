"""The thin Spark jobs that wire the parts together."""
