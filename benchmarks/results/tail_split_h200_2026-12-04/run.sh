#!/bin/bash
# session 19 call 4: the tail-split sort (TAIL_M) against the tiles as they are
T0=$(date +%s)
O=/tmp/o8; mkdir -p $O
source .device/setup.sh > $O/setup.txt 2>&1
timeout 280 python3 benchmarks/tail_tiles.py --out $O/tail_tiles.json --budget-s 220 > $O/tail_tiles.txt 2>&1
echo "end $(( $(date +%s) - T0 )) s" >> $O/setup.txt
tar czf $OUT/run8.tgz -C $O .
cat $O/tail_tiles.txt | tail -20
