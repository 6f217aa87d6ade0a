# Sourced by `make test`: the environment scripts/test-services.sh found (PostgreSQL URL, ...).
if [ -f .test-env ]; then . ./.test-env; fi
