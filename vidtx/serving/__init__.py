"""The registered model as MLflow's own tools use it: a pyfunc video classifier (`classifier`), and
what is logged for it (`packaging`). Above `vidtx.eval` (its preprocessing is evaluation's), below
`vidtx.tracking` (the registry logs it); no Ray Train, no DeepSpeed."""
