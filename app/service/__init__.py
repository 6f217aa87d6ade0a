"""The service layer the REST API (app/api), the web pages (app/web) and the CLI share: request bodies and their
reading, the time-capped search in planner processes, rendering and storing, saved clusters, the deadline search,
and the HTTP pieces both front ends use (accounts, dependencies). It imports neither app.api nor app.web.

Importing this package imports nothing else: the planner processes' forkserver preloads app.service.compute alone.
"""
