"""The REST API of one snowsource process: a Kafka Connect-compatible subset (SPEC §8, §9).

The usual Connect curl recipes work unchanged against it: status, stop / pause / resume /
restart, and KIP-875 offsets management (GET, PATCH, DELETE ``/connectors/{name}/offsets``), with
Connect's own status codes, response shapes and messages. Beside them: ``/metrics`` (Prometheus
text format), ``/health/live`` and ``/health/ready``.

States (``ConnectorState``):

* RUNNING / FAILED — pollers run; FAILED when every table has failed.
* STOPPED — ``PUT stop`` stopped every poller (no requests to ServiceNow), waited for their acks
  and wrote their final offsets before answering 204, so a later PATCH cannot be overwritten.
  Status shows ``"tasks": []``, like Connect. Only here may offsets be modified.
* PAUSED — ``PUT pause`` stops the pollers exactly like ``stop`` (no requests, final offsets
  written), but the task stays listed as PAUSED and offsets cannot be modified, as in Connect.
  A paused table keeps nothing in memory: resuming it is a restart from its stored offset.

``PUT resume`` (from STOPPED or PAUSED; nothing otherwise) re-reads the offsets topic and starts
every poller from its stored offset exactly like a process restart. ``POST restart`` restarts
every poller the same way, FAILED ones included; a STOPPED or PAUSED connector stays so (Connect
restarts a connector in its target state). None of these states survives a process restart.

Once shutdown began every state change answers 503: the supervisor refuses to start pollers
after it stopped them (its closing flag), so a resume racing SIGTERM starts nothing.

Each concept lives in its own module:

* ``api.server`` — ``RestServer``: the aiohttp application, its routes and lifecycle;
* ``engine.facade`` — ``EngineFacade``, the plain-data view of the engine the API talks to
  (the engine does not know the API; ``snowsource.cli.run`` composes the two);
* ``api.middleware`` — bearer authentication, errors in Connect's shape, read-time bounds;
* ``api.errors`` — ``RestError`` and Connect's own message texts;
* ``api.context`` — what the handlers share, and the guards every action obeys;
* ``api.views`` — ``GET /``, ``/connectors``, info and status (per-table ``tables``);
* ``api.actions`` — stop, pause, resume, restart;
* ``api.offsets`` — GET, PATCH, DELETE of offsets;
* ``api.health`` — ``/metrics``, ``/health/live``, ``/health/ready``.

Every text the API returns (``last_error``, ``trace``, error messages) passes through the
redactor; the bearer token is never logged.
"""
