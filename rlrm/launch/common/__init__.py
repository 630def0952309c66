"""What more than one launch program needs: API keys, ports, model-info names, the weight-update group."""
