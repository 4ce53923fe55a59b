"""The MAI Serve application: ingress, cascade, prompts and answer matching."""
