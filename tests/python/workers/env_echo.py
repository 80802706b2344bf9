"""Prints what the launcher set (no runtime needed)."""
import os
import sys

keys = ["CERAR_RANK", "CERAR_SIZE", "CERAR_LOCAL_RANK", "CERAR_LOCAL_SIZE",
        "CERAR_RENDEZVOUS_ADDR", "CERAR_RENDEZVOUS_PORT", "CERAR_FUSION_THRESHOLD",
        "CERAR_ALGORITHM", "CERAR_COMPONENTS", "CERAR_EPS", "CERAR_TIMELINE",
        "CERAR_TIMEOUT_SECONDS"]
print(" ".join(f"{k}={os.environ.get(k, '-')}" for k in keys))
print(f"secret_len={len(os.environ.get('CERAR_SECRET', ''))}")
print("two\nlines", end="")
sys.stdout.flush()
if len(sys.argv) > 1 and os.environ["CERAR_RANK"] == sys.argv[1]:
    sys.exit(int(sys.argv[2]))
if len(sys.argv) > 3:
    import time
    time.sleep(float(sys.argv[3]))
