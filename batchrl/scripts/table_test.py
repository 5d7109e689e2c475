import json

import numpy as np

from batchrl.scripts import table


def write_lines(path, config, finals, kept=None):
    with path.open("a") as file:
        for seed, final in enumerate(finals, 100):
            line = {"benchmark": "learning", "finished": True, "config": config, "seed": seed}
            line["final_return"] = final
            if kept is not None:
                line["kept_best_return"] = kept[seed - 100]
            file.write(json.dumps(line) + "\n")


def test_a_row_holds_its_seeds_iqm_and_worst_as_fractions_of_the_target(tmp_path):
    path = tmp_path / "results.jsonl"
    finals = [4000.0, 1000.0, 5000.0, 3000.0, 6000.0, 2000.0, 4500.0, 3500.0]
    kept = [f + 100.0 for f in finals]
    write_lines(path, "walker_clipped", finals, kept)
    lines = table.table([path], reps=200).splitlines()
    assert lines[:2] == list(table.HEADER)
    cells = [cell.strip() for cell in lines[2].strip("|").split("|")]
    middle = sorted(finals)[2:6]  # The IQM of eight: the mean of the middle four.
    iqm = sum(middle) / 4
    assert cells[0] == "`walker_clipped`" and cells[1] == "100-107"
    assert cells[2].startswith(f"{iqm:,.0f} ({iqm / 3588:.2f}) [")
    assert cells[3] == f"1,000 ({1000 / 3588:.2f})"
    assert cells[4] == f"{iqm + 100:,.0f} ({(iqm + 100) / 3588:.2f})"
    assert cells[5] == f"1,100 ({1100 / 3588:.2f})"
    assert cells[6] == "3,588"
    low, high = (float(x.replace(",", "")) for x in cells[2].split("[")[1].strip("]").split(", "))
    assert min(finals) <= low <= iqm <= high <= max(finals)


def test_one_row_per_preset_and_reacher_as_a_fraction_of_its_negative_target(tmp_path):
    path = tmp_path / "results.jsonl"
    write_lines(path, "hopper_clipped", [3000.0, 2000.0, 2500.0])
    write_lines(path, "reacher_clipped", [-4.0, -5.0, -3.9])
    rows = table.table([path], reps=200).splitlines()[2:]
    assert [r.split("|")[1].strip() for r in rows] == ["`hopper_clipped`", "`reacher_clipped`"]
    worst = rows[1].split("|")[4].strip()
    assert worst == f"-5.00 ({-4.1 / -5.0:.2f})"
    assert rows[0].split("|")[5].strip() == ""  # No kept evaluation in these lines.
    assert np.isclose(float(rows[0].split("|")[3].split("(")[0].replace(",", "")), 2500.0)
