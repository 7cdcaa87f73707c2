"""The HTTP APIs (FastAPI): the admin/registry API today; customer and messaging APIs later."""
