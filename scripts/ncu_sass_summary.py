"""What an Nsight Compute source page says about one kernel's instructions: the executed warp instructions by
opcode, the stall samples by reason, and the instructions grouped by how often each ran (a group of equal counts
is one path of the kernel: the key loop runs once per tile and warp, a CTA's prologue once per CTA and warp, a
spinning wait many times), with each group's opcodes. Compare two kernels by their groups: where their loops or
their waits differ shows there.

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > REPORT.sass.csv
    python3 scripts/ncu_sass_summary.py REPORT.sass.csv [MORE.sass.csv ...]
"""

import collections
import csv
import sys


def rows(path):
    """(source text, executed warp instructions, stall samples by reason) per instruction of the first kernel."""
    table = list(csv.reader(open(path)))
    header = table[1]
    at = {name: i for i, name in enumerate(header)}
    stalls = [name for name in header if name.startswith("stall_") and "Not Issued" not in name]

    def number(row, name):
        try:
            return float(row[at[name]].replace(",", ""))
        except ValueError:
            return 0.0

    for row in table[2:]:
        if len(row) == len(header):
            yield row[at["Source"]], number(row, "Instructions Executed"), {s: number(row, s) for s in stalls}


def opcode(source):
    words = source.split()
    return (words[1] if words[0].startswith("@") else words[0]) if words else "?"


def summary(path, groups=12):
    by_opcode, by_stall, by_count, count_ops = (collections.Counter(), collections.Counter(),
                                                collections.Counter(), collections.defaultdict(collections.Counter))
    for source, executed, stalls in rows(path):
        by_opcode[opcode(source).split(".")[0]] += executed
        by_stall.update(stalls)
        if executed:
            by_count[executed] += 1
            count_ops[executed][opcode(source).split(".")[0]] += executed
    samples = sum(by_stall.values()) or 1
    print(f"== {path}: {sum(by_opcode.values()):,.0f} warp instructions executed")
    print("  by opcode:", ", ".join(f"{k} {v / 1e6:.2f}M" for k, v in by_opcode.most_common(20)))
    print("  stall samples:", ", ".join(f"{k[6:]} {100 * v / samples:.1f}%" for k, v in by_stall.most_common(10)))
    heaviest = sorted(by_count, key=lambda count: -count * by_count[count])[:groups]
    for count in heaviest:
        ops = count_ops[count]
        print(f"  ran {count:>12,.0f} times: {by_count[count]:5d} instructions, {count * by_count[count] / 1e6:7.2f}M:",
              ", ".join(f"{k} {v / 1e6:.2f}" for k, v in ops.most_common(8)))


if __name__ == "__main__":
    for report in sys.argv[1:]:
        summary(report)
