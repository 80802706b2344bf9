cd /work/main
python3 bench/tcp_ring.py --ranks 8 --bytes 64M --netns-prefix cerar-ns
for seg in 256K 64K; do
  echo "# segment $seg"
  python3 bench/runner.py --ranks 8 --prefix cerar-ns --port $((29900 + ${#seg})) --timeout 300 -- build-bench/cerar-bench-net --sizes 64M --repeats 2 --segment-bytes $seg --only ring,cerar-c32,cerar-c128,cerar-auto
done
