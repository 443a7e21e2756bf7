#!/bin/bash
# The official postgres image's entry point, in brief (see the Dockerfile beside this file).
set -euo pipefail

if [[ ${1:-} == -* ]]; then
    set -- postgres "$@"
fi
# Anything else, or postgres asked for its version or help, runs as it is.
if [[ ${1:-} != postgres ]] || [[ " $* " =~ \ (-V|--version|-\?|--help|--describe-config)\  ]]; then
    exec "$@"
fi

# POSTGRES_PASSWORD_FILE and the like (Docker secrets): read here, as root, before the
# privileges go; the variable then holds the value, as in the official entry point.
for var in POSTGRES_PASSWORD POSTGRES_USER POSTGRES_DB POSTGRES_INITDB_ARGS; do
    file_var=${var}_FILE
    if [[ -n ${!file_var:-} ]]; then
        if [[ -n ${!var:-} ]]; then
            echo "both $var and $file_var are set (but are exclusive)" >&2
            exit 1
        fi
        export "$var=$(<"${!file_var}")"
        unset "$file_var"
    fi
done

if (($(id -u) == 0)); then
    install -d -o postgres -g postgres -m 0700 "$PGDATA"
    install -d -o postgres -g postgres -m 3777 /var/run/postgresql
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [[ ! -s $PGDATA/PG_VERSION ]]; then
    if [[ -z ${POSTGRES_PASSWORD:-} && ${POSTGRES_HOST_AUTH_METHOD:-} != trust ]]; then
        echo "Database is uninitialized and superuser password is not specified." >&2
        echo "  You must specify POSTGRES_PASSWORD to a non-empty value for the superuser." >&2
        exit 1
    fi
    user=${POSTGRES_USER:-postgres}
    db=${POSTGRES_DB:-$user}
    # shellcheck disable=SC2086  # extra arguments, split as the official image splits them
    initdb --username="$user" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") \
        --auth-local=trust --auth-host=scram-sha-256 ${POSTGRES_INITDB_ARGS:-} -D "$PGDATA" >/dev/null
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
    echo "host all all all ${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}" >>"$PGDATA/pg_hba.conf"
    # A server on the socket only while the database and the init scripts are made.
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$user")
    if [[ $db != postgres ]]; then
        "${psql[@]}" --dbname postgres --set db="$db" <<<'CREATE DATABASE :"db";'
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        # shellcheck disable=SC1090  # the init scripts are the user's
        case "$f" in
            *.sql) "${psql[@]}" --dbname "$db" -f "$f" ;;
            *.sh) . "$f" ;;
            *) ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "PostgreSQL init process complete; ready for start up."
fi
exec "$@"
