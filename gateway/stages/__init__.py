"""The pipeline's stages, one module each, in the order ``gateway.app.build_pipeline`` declares."""
