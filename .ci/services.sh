# Sourced by .ci/test: installs from Debian's apt what gpud's tests use as real
# components (Docker engine, sshd and the ssh client, git, python3, pebble,
# busybox for test images) and starts the Docker engine when none answers,
# stopping it again when the sourcing shell exits. Safe to run again.
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v busybox >/dev/null || [ -x /bin/busybox ] || need+=(busybox-static)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null || need+=(openssh-client)   # ssh, scp, ssh-keygen: the ssh-into-runs tests
command -v git >/dev/null || need+=(git)              # git http-backend serves the repos-by-URL tests
command -v python3 >/dev/null || need+=(python3)      # the process runtime's python: "3.X" test
command -v pebble >/dev/null || need+=(pebble)
command -v ip >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  echo "ci: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! timeout 10 docker info >/dev/null 2>&1; then
  echo "ci: starting dockerd"
  pidfile=/run/gpud-ci-dockerd.pid
  if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then rm -f "$pidfile"; fi
  nohup dockerd --pidfile "$pidfile" >/tmp/gpud-ci-dockerd.log 2>&1 &
  ci_dockerd=$!
  # Stop what this script started, however the tests end.
  trap 'kill "$ci_dockerd" 2>/dev/null && timeout 30 tail --pid="$ci_dockerd" -f /dev/null; rm -f "$pidfile"' EXIT
  for _ in $(seq 1 60); do
    timeout 5 docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! timeout 10 docker info >/dev/null 2>&1; then
    echo "ci: dockerd did not answer within 60s; its log:" >&2
    tail -50 /tmp/gpud-ci-dockerd.log >&2
    exit 1
  fi
fi
echo "ci: docker $(docker version --format '{{.Server.Version}}') ready"
# The Kubernetes backend's tests: etcd-server, and kube-apiserver and kwok built
# from the Go module proxy, cached by version (cold: many minutes; warm: instant).
. .ci/kube.sh
# The Slurm backend's tests: Debian's Slurm 22.05 (slurmctld, slurmd, slurmrestd
# with JWT auth, munge), one node with 4 fake GPUs, stopped on exit.
. .ci/slurm.sh
