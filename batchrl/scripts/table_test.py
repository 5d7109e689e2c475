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


def test_a_config_named_by_its_task_has_its_target_and_each_row_names_its_commit(tmp_path):
    path = tmp_path / "zoo.jsonl"
    write_lines(path, "HalfCheetah-v5", [6000.0, 6200.0])
    lines = [dict(json.loads(line), commit="0123456789" * 4) for line in path.open()]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    write_lines(path, "hopper_clipped", [3000.0])  # Written before lines named their commit.
    rows = table.table([path], reps=100).splitlines()[2:]
    cheetah = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert cheetah[6] == "7,115" and cheetah[7] == "0123456"
    assert rows[1].split("|")[-2].strip() == "not recorded"


PAGE = """# Results

Prose that the update leaves alone, a {{brace}}, a | bar |.

<!-- table: reps=100 a.jsonl -->
| an old table |
<!-- end table -->

Between the blocks.
<!-- table: reps=100 a.jsonl more/b.jsonl -->
<!-- end table -->
The end, with no newline."""


def page_with_runs(tmp_path):
    write_lines(tmp_path / "a.jsonl", "walker_clipped", [4000.0, 1000.0, 5000.0])
    (tmp_path / "more").mkdir()
    write_lines(tmp_path / "more" / "b.jsonl", "hopper_clipped", [3000.0, 2000.0, 2500.0])
    page = tmp_path / "results.md"
    page.write_text(PAGE)
    return page


def test_updating_a_page_rewrites_its_blocks_from_their_files_and_nothing_else(tmp_path):
    page = page_with_runs(tmp_path)
    assert len(table.update_page(page)) == 2
    walker = table.table([tmp_path / "a.jsonl"], reps=100)
    both = table.table([tmp_path / "a.jsonl", tmp_path / "more" / "b.jsonl"], reps=100)
    expected = PAGE.replace("| an old table |\n", walker + "\n").replace(
        "more/b.jsonl -->\n", "more/b.jsonl -->\n" + both + "\n"
    )
    assert page.read_text() == expected
    assert table.update_page(page) == [] and page.read_text() == expected


def test_a_block_its_files_no_longer_make_is_named_and_the_page_left_as_it_is(tmp_path, capsys):
    page = page_with_runs(tmp_path)
    table.update_page(page)
    assert table.check_page(page) == []
    made = page.read_text()
    write_lines(tmp_path / "more" / "b.jsonl", "hopper_clipped", [1.0, 2.0, 3.0, 4.0])
    stale = f"{page}:12: <!-- table: reps=100 a.jsonl more/b.jsonl -->"
    assert table.check_page(page) == [stale]
    assert table.main(["--check", str(page)]) == 1
    assert capsys.readouterr().out == f"stale: {stale}\n"
    assert page.read_text() == made
    assert table.main(["--update", str(page)]) == 0
    assert table.check_page(page) == []


def test_a_block_with_no_end_or_no_files_is_an_error_naming_its_line(tmp_path, capsys):
    page = page_with_runs(tmp_path)
    page.write_text(PAGE.replace("<!-- end table -->\n\nBetween", "\nBetween"))
    assert table.main(["--update", str(page)]) == 2
    assert f"{page}:9: a table block opens inside another" in capsys.readouterr().err
    page.write_text("<!-- table: reps=100 -->\n<!-- end table -->\n")
    assert table.main(["--check", str(page)]) == 2
    assert f"{page}:1: <!-- table: reps=100 --> names no JSON lines" in capsys.readouterr().err


def test_evaluation_noise_lines_make_their_own_table(tmp_path):
    path = tmp_path / "noise.jsonl"
    lines = [
        {
            "benchmark": "evaluation_noise",
            "config": "hopper_clipped",
            "episodes": episodes,
            "within_std": within,
            "between_std": 697.0,
            "ratio": within / 697.0,
            "scores": {"100": [1.0], "101": [2.0], "102": [3.0]},
            "commit": "8172291" + "0" * 33,
        }
        for episodes, within in ((8, 4.25), (32, 1.78))
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert table.table([path]).splitlines()[2:] == [
        "| `hopper_clipped` | 100-102 | 8 | 4.25 | 697 | 0.01 | 8172291 |",
        "| `hopper_clipped` | 100-102 | 32 | 1.78 | 697 | 0.00 | 8172291 |",
    ]


def test_a_seeds_block_gives_every_seed_its_own_column_and_leaves_unrun_seeds_blank(tmp_path):
    path = tmp_path / "runs.jsonl"
    write_lines(path, "walker_clipped", [4252.8, 1762.2, 4431.6])
    write_lines(path, "breakout_minatar", [25.04, 41.6])
    page = tmp_path / "page.md"
    page.write_text("<!-- table: seeds runs.jsonl -->\n<!-- end table -->\n")
    assert table.update_page(page)
    assert page.read_text().splitlines()[1:-1] == [
        "| final return, seed | 100 | 101 | 102 |",
        "| --- | ---: | ---: | ---: |",
        "| `walker_clipped` | 4,253 | 1,762 | 4,432 |",
        "| `breakout_minatar` | 25.04 | 41.60 |  |",
    ]
    assert table.check_page(page) == []


def test_the_command_prints_the_seeds_table_with_seeds(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    write_lines(path, "hopper_clipped", [3378.0, 3356.0])
    assert table.main(["--seeds", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "| `hopper_clipped` | 3,378 | 3,356 |"
