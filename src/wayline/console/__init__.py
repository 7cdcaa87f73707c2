"""The web console under /console: server-rendered pages over the services the API uses."""
