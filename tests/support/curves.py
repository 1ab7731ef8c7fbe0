"""Quality curves as the programs write them (a list of {"step", "seconds", "cpu_seconds", "flops",
"ppl"}), read independently of lwcl's code for the program tests."""


def reach(curve, target):
    """The cost at which `curve` first reaches `target` or below: the first such point, its seconds,
    processor seconds and FLOPs interpolated linearly (in the curve's value) from the point before when
    that one was higher; None when no point reaches it."""
    for i, p in enumerate(curve):
        if p["ppl"] <= target:
            if i == 0 or not curve[i - 1]["ppl"] > p["ppl"]:
                return p
            a = curve[i - 1]
            f = (a["ppl"] - target) / (a["ppl"] - p["ppl"])
            return {k: a[k] + f * (p[k] - a[k]) for k in ("seconds", "cpu_seconds", "flops")}
    return None
