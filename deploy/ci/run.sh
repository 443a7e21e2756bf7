#!/usr/bin/env bash
# The deployment, run for real: build the project's Dockerfile and bring its docker-compose.yml
# up on this machine, with a Docker daemon of its own, then test them (deploy/ci/checks.py).
#
#   deploy/ci/run.sh [--python PYTHON] [--cache DIR]
#
# As root. PYTHON has sealflow installed (the checks use its client library; default python3).
# --cache DIR keeps the daemon's images in DIR between runs (for working on this script: the
# base and the stand-ins are then built once); CI runs without it, from nothing. Also for that:
# SEALFLOW_CI_ONLY=load,benchmark runs only those checks (names in checks.py).
#
# Docker Hub is out of reach here, so the images the project's files name are stand-ins built
# from Debian trixie packages (deploy/ci/standins/) and tagged with those names; the project's
# Dockerfile and docker-compose.yml are used as they are, from a copy of the working tree.
# Everything this script starts (dockerd, its containerd, the containers) it stops by PID, it
# removes everything it made, and it puts back the host's network settings dockerd changes (its
# iptables chains and rules, the FORWARD policy, ip_forward, the bridges), also when a step
# fails or the run is interrupted.
#
# Exit status: 0 every check passed; 1 a step failed; 3 dockerd could not start here (then
# nothing was tested, and the last lines say so).
set -euo pipefail

python=python3 cache=""
while (($#)); do
    case "$1" in
        --python) python=$2; shift 2 ;;
        --cache) cache=$(realpath -m "$2"); shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
python=$(command -v "$python") || { echo "no Python at $python" >&2; exit 2; }
[[ $python == /* ]] || python=$PWD/$python  # a venv's python: its path, not its symlink's target
cd -P "$(dirname "${BASH_SOURCE[0]}")/../.."
repo=$PWD
((EUID == 0)) || { echo "run.sh needs root (it starts dockerd)" >&2; exit 2; }

# Addresses of our own, away from the host's: the default bridge and every compose network.
BIP=10.213.0.1/24
POOL=base=10.213.16.0/20,size=24
POOL_PREFIX=10.213.
MIRROR=${SEALFLOW_CI_MIRROR:-}
if [[ -z $MIRROR ]]; then
    # The Debian mirror apt already uses (deb822 or one-line sources).
    MIRROR=$(grep -rhoE '^(URIs:\s*|deb\s+(\[[^]]*\]\s+)?)https?://[^ ]+/debian/?(\s|$)' \
        /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | grep -oE 'https?://[^ ]+' | head -1 || true)
    MIRROR=${MIRROR:-http://deb.debian.org/debian}
fi

# /var/tmp, not /tmp: dockerd's data root needs a file system overlayfs can sit on, and the
# paths must stay short (containerd's sockets live under the exec root).
work=$(mktemp -d /var/tmp/sfci.XXXXXX)
chmod 711 "$work"
sock=$work/docker.sock
export DOCKER_HOST=unix://$sock DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0
docker=/usr/bin/docker
[[ -x $docker ]] || docker=$(command -v docker)

now() { echo "${EPOCHREALTIME/./}"; }  # microseconds
t0=$(now)
since() {  # seconds since $1, rounded to tenths
    local us=$(($(now) - $1 + 50000))
    printf '%d.%d' $((us / 1000000)) $((us / 100000 % 10))
}
log() { printf '[%6s s] %s\n' "$(since "$t0")" "$*"; }

# ---- the host's network state, before dockerd touches it -------------------------------
iptables_state() { for table in filter nat mangle raw; do iptables -t "$table" -S 2>/dev/null | sed "s/^/$table /"; done; }
iptables_state >"$work/iptables.before"
ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort >"$work/links.before"
ip_forward_before=$(cat /proc/sys/net/ipv4/ip_forward)
bridge_nf_before=""
[[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] &&
    bridge_nf_before=$(cat /proc/sys/net/bridge/bridge-nf-call-iptables)
if grep -qx docker0 "$work/links.before"; then
    echo "a docker0 bridge exists already (another Docker daemon?): not starting one beside it" >&2
    rm -rf "$work"
    exit 3
fi

restore_network() {
    # Rules dockerd added: those that are new since the start and are about its chains, its
    # bridges or its addresses. Deleted one by one (never a restore of the whole table: other
    # programs on this machine may have changed their own rules meanwhile).
    iptables_state >"$work/iptables.after"
    local table rule chain
    grep -vxFf "$work/iptables.before" "$work/iptables.after" |
        grep -E 'DOCKER|docker0|br-[0-9a-f]{12}|'"${POOL_PREFIX//./\\.}" |
        grep -E '^[a-z]+ -A ' |
        while read -r table rule; do
            # shellcheck disable=SC2086  # the rule's words, as iptables -S printed them
            eval "iptables -t $table ${rule/-A /-D }" 2>/dev/null || true
        done
    grep -vxFf "$work/iptables.before" "$work/iptables.after" | grep -E '^[a-z]+ -N DOCKER' |
        while read -r table _ chain; do
            iptables -t "$table" -F "$chain" 2>/dev/null || true
        done
    grep -vxFf "$work/iptables.before" "$work/iptables.after" | grep -E '^[a-z]+ -N DOCKER' |
        while read -r table _ chain; do
            iptables -t "$table" -X "$chain" 2>/dev/null || true
        done
    # Chain policies as they were (dockerd sets FORWARD to DROP when it enables forwarding).
    grep -E '^[a-z]+ -P ' "$work/iptables.before" | while read -r table _ chain policy; do
        iptables -t "$table" -P "$chain" "$policy" 2>/dev/null || true
    done
    echo "$ip_forward_before" >/proc/sys/net/ipv4/ip_forward
    if [[ -n $bridge_nf_before && -e /proc/sys/net/bridge/bridge-nf-call-iptables ]]; then
        echo "$bridge_nf_before" >/proc/sys/net/bridge/bridge-nf-call-iptables
    fi
    # Bridges and veth ends that appeared with dockerd and are its own.
    ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort >"$work/links.after"
    comm -13 "$work/links.before" "$work/links.after" | grep -E '^(docker0|br-[0-9a-f]{12}|veth[0-9a-f]+)$' |
        while read -r link; do ip link delete "$link" 2>/dev/null || true; done
}

dockerd_pid=""
stop_everything() {
    local status=$?
    trap - EXIT INT TERM
    set +e
    log "cleaning up (exit status so far: $status)"
    if [[ -n $dockerd_pid ]] && kill -0 "$dockerd_pid" 2>/dev/null; then
        # Containers first, so that their shims exit; then the daemon, which stops its containerd.
        local ids
        ids=$(timeout 60 "$docker" ps -aq 2>/dev/null)
        if [[ -n $ids ]]; then
            # shellcheck disable=SC2086
            timeout 120 "$docker" rm -f -v $ids >/dev/null 2>&1
        fi
        # Volumes and networks too (they would outlive the run with --cache).
        timeout 60 "$docker" volume prune -f >/dev/null 2>&1
        timeout 60 "$docker" network prune -f >/dev/null 2>&1
        kill -TERM "$dockerd_pid"
        for _ in $(seq 150); do
            kill -0 "$dockerd_pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$dockerd_pid" 2>/dev/null
    fi
    # Whatever is still running from our directories (containerd, shims, a container's
    # processes after a KILL), found by PID through its command line or its root.
    local pid
    local f cmd
    for f in /proc/[0-9]*/cmdline; do
        cmd=$(tr '\0' ' ' 2>/dev/null <"$f") || continue
        pid=${f#/proc/} pid=${pid%/cmdline}
        [[ $cmd == *"$work/"* && $pid != "$$" && $pid != "$BASHPID" ]] && kill -KILL "$pid" 2>/dev/null
    done
    # Mounts under our directory (overlays, network namespaces), deepest first.
    findmnt -rn -o TARGET | grep -F -e "$work/" ${cache:+-e "$cache/"} | sort -r | while read -r mnt; do
        umount -l "$mnt" 2>/dev/null
    done
    restore_network
    rm -rf "$work"
    log "done: dockerd stopped, $work removed, host network settings restored"
    exit "$status"
}
trap stop_everything EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- steps ----------------------------------------------------------------------------
step() {
    local name=$1 start
    shift
    start=$(now)
    log "STEP $name"
    "$@"
    log "PASS $name ($(since "$start") s)"
}

start_dockerd() {
    echo '{}' >"$work/daemon.json"  # none of the host's /etc/docker/daemon.json
    local data=$work/data
    if [[ -n $cache ]]; then
        mkdir -p "$cache"
        data=$cache
    fi
    dockerd --config-file "$work/daemon.json" --data-root "$data" --exec-root "$work/exec" \
        -H "unix://$sock" --pidfile "$work/docker.pid" --bip "$BIP" \
        --default-address-pool "$POOL" --mtu 1400 --log-level warn >"$work/dockerd.log" 2>&1 &
    dockerd_pid=$!
    for _ in $(seq 120); do
        "$docker" version >/dev/null 2>&1 && return 0
        kill -0 "$dockerd_pid" 2>/dev/null || break
        sleep 0.5
    done
    echo "dockerd did not start; its log:" >&2
    tail -20 "$work/dockerd.log" >&2
    echo "SKIPPED: deploy/ci/run.sh could not start dockerd here: the image and the compose stack were NOT tested" >&2
    exit 3
}

debian_base() {
    if [[ -n $cache ]] && "$docker" image inspect local/debian:trixie >/dev/null 2>&1; then
        echo "    local/debian:trixie from the cache"
        return 0
    fi
    debootstrap --variant=minbase trixie "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
        { tail -20 "$work/debootstrap.log" >&2; return 1; }
    # apt in the images talks to the same mirror; no documentation, to keep them small.
    tar -C "$work/rootfs" -c . | "$docker" import - local/debian:trixie >/dev/null
    rm -rf "$work/rootfs"
}

# The images named by the project's files, from its copy: Dockerfile's `FROM python:${PYTHON}-slim-trixie`
# with its ARG default, and every `image:` of docker-compose.yml but its own.
copy_tree() {
    mkdir "$work/sealflow"
    # The working tree as git sees it (tracked and new files, minus what .gitignore excludes).
    git -C "$repo" ls-files -z --cached --others --exclude-standard |
        (cd "$repo" && xargs -0 tar -c --ignore-failed-read 2>/dev/null) | tar -C "$work/sealflow" -x
}

postgres_image=""
build_standins() {
    local python_tag image name version pids=() names=() i status=0
    python_tag=$(sed -n 's/^ARG PYTHON=//p' "$work/sealflow/Dockerfile")
    mkdir -p "$work/ctx"
    build_one() {  # stand-in tag [build args...]
        local name=$1 tag=$2 ctx=$work/ctx/$1
        shift 2
        cp -r "$repo/deploy/ci/standins/$name" "$ctx"
        cp /etc/ssl/certs/ca-certificates.crt "$ctx/host-ca.crt"
        "$docker" build -q -t "$tag" "$@" "$ctx" >"$work/build-$name.log" 2>&1
    }
    build_one python "python:$python_tag-slim-trixie" &
    pids+=($!) names+=(python)
    for image in $(cd "$work/sealflow" && docker-compose --profile load config | sed -n 's/^ *image: //p' | sort -u); do
        name=${image%%:*} version=${image#*:}
        case "$name" in
            haproxy) build_one haproxy "$image" & names+=(haproxy) ;;
            postgres) build_one postgres "$image" & names+=(postgres) postgres_image=$image ;;
            prom/prometheus) build_one prometheus "$image" & names+=(prometheus) ;;
            locustio/locust) build_one locust "$image" --build-arg "LOCUST_VERSION=$version" & names+=(locust) ;;
            sealflow*) continue ;;
            *) echo "no stand-in for $image" >&2; return 1 ;;
        esac
        pids+=($!)
    done
    # The postgres stand-in is built and tested even before the compose file names it.
    if [[ -z $postgres_image ]]; then
        postgres_image=postgres:17
        build_one postgres "$postgres_image" &
        pids+=($!) names+=(postgres)
    fi
    for i in "${!pids[@]}"; do
        if ! wait "${pids[$i]}"; then
            echo "the ${names[$i]} stand-in did not build:" >&2
            tail -30 "$work/build-${names[$i]}.log" >&2 || true
            status=1
        fi
    done
    ((status == 0)) || return 1
    # What each stand-in holds, beside the name it stands in for.
    local what
    for image in $("$docker" images --filter dangling=false --format '{{.Repository}}:{{.Tag}}' | sort); do
        case "$image" in
            python:*) what=$("$docker" run --rm "$image" python --version) ;;
            haproxy:*) what=$("$docker" run --rm "$image" haproxy -v | sed -n 1p) ;;
            postgres:*) what=$("$docker" run --rm "$image" postgres --version) ;;
            prom/prometheus:*) what=$("$docker" run --rm "$image" --version 2>&1 | sed -n 1p) ;;
            locustio/locust:*) what=$("$docker" run --rm "$image" --version 2>&1 | sed -n 1p) ;;
            *) continue ;;
        esac
        echo "    $image: $what"
    done
}

build_sealflow() {
    (cd "$work/sealflow" && docker-compose -p sfci build --quiet sealflow) >"$work/build-sealflow.log" 2>&1 ||
        { tail -40 "$work/build-sealflow.log" >&2; return 1; }
}

checks() {  # its own steps, each with PASS and its duration
    SEALFLOW_CI_T0=$((t0 / 1000000)).$(printf '%06d' $((t0 % 1000000))) "$python" "$repo/deploy/ci/checks.py" --docker "$docker" --project "$work/sealflow" \
        --benchmarks "$repo/benchmarks" --postgres-image "$postgres_image" \
        ${SEALFLOW_CI_ONLY:+--only "$SEALFLOW_CI_ONLY"}
}

log "work directory $work; Debian mirror $MIRROR; $("$docker" --version 2>/dev/null || echo no docker CLI)"
step "dockerd starts (own data root, exec root, socket, pidfile; bip $BIP, pool $POOL, mtu 1400)" start_dockerd
step "Debian trixie base from debootstrap --variant=minbase, imported as local/debian:trixie" debian_base
step "a copy of the working tree" copy_tree
step "stand-in images from Debian packages and PyPI, tagged as the project's files name them" build_standins
step "the project's Dockerfile builds (docker-compose build)" build_sealflow
checks
