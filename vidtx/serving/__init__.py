"""The registered models as MLflow's own tools use them: a pyfunc video classifier (`classifier`), a
pretrained encoder that answers embeddings (`encoder`), what they share (`video_model`), and what is
logged for them (`packaging`). Above `vidtx.eval` (its preprocessing is evaluation's), below
`vidtx.tracking` (the registry logs them); no Ray Train, no DeepSpeed."""
