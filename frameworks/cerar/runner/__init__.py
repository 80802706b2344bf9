"""The launcher's side of cerar: cerarrun (cli), its ranks' start and output (launch, hosts),
horovodrun's flags (horovodrun) and the elastic driver (elastic_driver, elastic_generations,
elastic_hosts). Nothing here runs inside a rank; the ranks' side is the rest of the package."""
