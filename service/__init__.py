"""sealflow's HTTP service (FastAPI app, keystore, auth, CLI).

Only the CLI's engine commands exist so far; the HTTP service is the next issue.
"""
