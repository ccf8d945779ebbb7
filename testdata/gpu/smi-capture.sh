#!/bin/sh
# Plays back captured nvidia-smi output for tests: smi-capture.sh DIR ARGS...
# prints the file in DIR that the real nvidia-smi printed for ARGS on the
# captured host, so the code under test runs its real exec path.
dir=$1
shift
case "$*" in
"--query-gpu=index,uuid,name,"*) exec cat "$dir/query-gpu.csv" ;;
"--query-gpu=index,uuid,utilization.gpu,"*) exec cat "$dir/query-gpu-sample.csv" ;;
"-q") exec cat "$dir/q.txt" ;;
"-L") exec cat "$dir/L.txt" ;;
"topo -m") exec cat "$dir/topo-m.txt" ;;
esac
echo "smi-capture: no capture in $dir answers: $*" >&2
exit 2
