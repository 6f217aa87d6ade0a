#!/usr/bin/env bash
# Installs and starts what the test suite uses outside Python, where this machine lets us (root + apt):
# Debian's chromium (browser test), shellcheck (rendered scripts), iproute2 (multi-node test) and a
# PostgreSQL server on 127.0.0.1 (the API tests' PostgreSQL run). Idempotent; writes ./.test-env (the repository root).
set -uo pipefail
cd "$(dirname "$0")/.."
envfile=.test-env
: > "$envfile"

have() { command -v "$1" >/dev/null 2>&1; }

if [ "$(id -u)" = 0 ] && have apt-get; then
  missing=()
  have chromium || missing+=(chromium)
  have shellcheck || missing+=(shellcheck)
  have ip || missing+=(iproute2)
  have pg_ctlcluster || missing+=(postgresql)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "test-services: apt-get install ${missing[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null 2>&1 \
      || echo "test-services: could not install ${missing[*]} (tests that need them will skip, saying why)"
  fi
fi

# PostgreSQL: start Debian's default cluster and make a throwaway database for the tests.
if [ "$(id -u)" = 0 ] && have pg_lsclusters; then
  cluster=$(pg_lsclusters -h 2>/dev/null | head -n 1)
  if [ -n "$cluster" ]; then
    ver=$(echo "$cluster" | awk '{print $1}'); name=$(echo "$cluster" | awk '{print $2}')
    pg_ctlcluster "$ver" "$name" start >/dev/null 2>&1 || true
    if su postgres -c "psql -qtAc 'select 1'" >/dev/null 2>&1; then
      su postgres -c "psql -qc \"do \\\$\\\$ begin if not exists (select from pg_roles where rolname='trainplan') then create role trainplan login password 'trainplan'; end if; end \\\$\\\$;\"" >/dev/null
      su postgres -c "psql -qtAc \"select 1 from pg_database where datname='trainplan_test'\"" | grep -q 1 \
        || su postgres -c "createdb -O trainplan trainplan_test"
      port=$(echo "$cluster" | awk '{print $3}')
      echo "export TRAINPLAN_TEST_POSTGRES_URL=postgresql+psycopg://trainplan:trainplan@127.0.0.1:${port}/trainplan_test" >> "$envfile"
    fi
  fi
fi
exit 0
