"""The data path: a supervisor runs one poller per owned table (ServiceNow client -> poller ->
sink -> offsets store) and shuts everything down within one deadline."""
