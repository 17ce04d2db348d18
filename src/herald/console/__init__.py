"""The operator console: server-rendered screens under /console (issue 13).

Jinja2 templates and vendored htmx and uPlot (static/, no build step, no CDN). Every screen calls
the same services as the admin API with the signed-in operator's permissions, read afresh from the
directory on every request: the console has no privileges of its own.
"""
