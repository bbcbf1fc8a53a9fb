"""The rubric reward outside rubricrl's own trainer, for the engines that scale past TRL (verl, OpenRLHF).

`rubricrl reward serve` (service_cli.py) serves the reward over HTTP: service.py grades a batch as `rurl train`
grades one, service_access.py holds its access rules (a bearer token off loopback), openrlhf_query.py reads
OpenRLHF's request (prompt and response decoded together). `rubricrl export verl|openrlhf` (export_verl.py,
export_openrlhf.py) writes a rubric dataset in those engines' data formats, each row naming its rubric by id.
cli.py attaches both commands."""
