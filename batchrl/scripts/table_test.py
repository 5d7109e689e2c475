import json
import re

import numpy as np
import pytest

from batchrl.scripts import columns as columns_lib
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


def test_kept_columns_stand_for_each_config_whose_seeds_were_all_evaluated_again(tmp_path):
    # A file whose other lines lacked kept returns (a sweep run on to a raised budget with
    # --evaluate-best keeps the lower budget's lines) emptied every row's kept columns.
    path = tmp_path / "results.jsonl"
    write_lines(path, "hopper_clipped", [3000.0, 2000.0])
    write_lines(path, "walker_clipped", [4000.0, 1000.0], kept=[4100.0, 1100.0])
    rows = [row.split("|") for row in table.table([path], reps=100).splitlines()[2:]]
    assert [row[1].strip() for row in rows] == ["`hopper_clipped`", "`walker_clipped`"]
    assert rows[0][5].strip() == "" and rows[0][6].strip() == ""
    assert rows[1][6].strip().startswith("1,100 (")  # Walker's worst kept return.


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
    # A seed run again on another commit counts its last line: only that commit is named.
    rerun = dict(lines[0], final_return=6100.0, commit="abcdef1" + "0" * 33)
    with path.open("a") as file:
        file.write(json.dumps(rerun) + "\n")
    rows = table.table([path], reps=100).splitlines()[2:]
    assert rows[0].split("|")[-2].strip() == "0123456, abcdef1"  # Seeds 100 and 101.
    rerun = dict(lines[1], commit="abcdef1" + "0" * 33)
    with path.open("a") as file:
        file.write(json.dumps(rerun) + "\n")
    rows = table.table([path], reps=100).splitlines()[2:]
    assert rows[0].split("|")[-2].strip() == "abcdef1"


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
    # A block that chooses rows, its --columns forgotten: said so, not "no file '--where'".
    page.write_text("<!-- table: a.jsonl --where config=hopper_clipped -->\n<!-- end table -->\n")
    assert table.main(["--check", str(page)]) == 2
    assert capsys.readouterr().err == (
        f"table: error: {page}:1: --where chooses the rows of a table of --columns; none is given\n"
    )


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


def write_records(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


RUNS = [
    {
        "benchmark": "overlap",
        "run": 1,
        "results": [
            {"backend": "mujoco", "rate": [40227, 39842], "ratio": 0.794, "left": []},
            {"backend": "processes", "rate": [27381, 27495], "ratio": 0.662, "left": [7]},
        ],
    },
    {"benchmark": "overlap", "run": 2, "results": [{"backend": "mujoco", "rate": [1, 3]}]},
]


def test_columns_make_a_row_per_element_with_its_lines_fields_and_chosen_formats(tmp_path):
    path = tmp_path / "overlap.jsonl"
    write_records(path, RUNS)
    columns = ["run", "backend:`{}`", "per round=rate", "halves / serial=ratio:.1%", "left"]
    assert columns_lib.columns_table([path], columns, rows="results").splitlines() == [
        "| run | backend | per round | halves / serial | left |",
        "| ---: | --- | --- | ---: | --- |",
        "| 1 | `mujoco` | 40,227, 39,842 | 79.4% | none |",
        "| 1 | `processes` | 27,381, 27,495 | 66.2% | 7 |",
        "| 2 | `mujoco` | 1, 3 |  |  |",
    ]


def test_where_keeps_the_rows_any_condition_holds_for(tmp_path):
    path = tmp_path / "overlap.jsonl"
    write_records(path, RUNS)
    kept = columns_lib.columns_table([path], ["run", "backend"], rows="results", where=["run=2"])
    assert kept.splitlines()[2:] == ["| 2 | mujoco |"]
    either = ["backend=processes", "run=2"]
    kept = columns_lib.columns_table([path], ["run", "backend"], rows="results", where=either)
    assert kept.splitlines()[2:] == ["| 1 | processes |", "| 2 | mujoco |"]


def test_a_column_divides_two_values_or_takes_the_mean_of_a_slice(tmp_path):
    path = tmp_path / "check.jsonl"
    lines = [
        {"check": "a", "rate": [1, 10, 20], "wall": 3.0, "train": 1.5, "ok": True},
        {"check": "b", "wall": 2.0, "ok": False, "error": "stopped | late"},
    ]
    write_records(path, lines)
    columns = ["check", "mean(rate[1:]):.1f", "wall / train=wall/train:{:.2f}x", "ok", "error"]
    assert columns_lib.columns_table([path], columns).splitlines() == [
        "| check | mean(rate[1:]) | wall / train | ok | error |",
        "| --- | ---: | ---: | --- | --- |",
        "| a | 15.0 | 2.00x | yes |  |",
        "| b |  |  | no | stopped \\| late |",
    ]


def test_a_runs_metrics_are_read_by_their_keys_and_a_file_of_no_run_is_one_line(tmp_path, capsys):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": 6000, "eval/return": -1100.5, "train/kl": 0.02}, {"step": 12000}]
    write_records(path, rows)
    columns = ["step", "eval/return:.1f", "kl=train/kl"]
    assert columns_lib.columns_table([path], columns).splitlines() == [
        "| step | eval/return | kl |",
        "| ---: | ---: | ---: |",
        "| 6,000 | -1100.5 | 0.02 |",
        "| 12,000 |  |  |",
    ]
    assert table.main([str(path)]) == 2
    assert capsys.readouterr().err == (
        f"table: error: no finished run in {path}: a table reads a sweep's results.jsonl "
        "(--columns reads any JSON lines)\n"
    )


def test_a_column_no_row_has_or_a_line_with_no_rows_is_an_error(tmp_path):
    path = tmp_path / "overlap.jsonl"
    write_records(path, RUNS)
    with pytest.raises(ValueError, match="'halves': no row has 'halves'"):
        columns_lib.columns_table([path], ["backend", "halves"], rows="results")
    with pytest.raises(ValueError, match=r"overlap.jsonl:1: no list of records at 'result'"):
        columns_lib.columns_table([path], ["backend"], rows="result")
    with pytest.raises(ValueError, match="reads a dict"):
        columns_lib.columns_table([path], ["results"], where=["run=2"])
    # Each named what it lacks: the ratio's missing part, the key no row has.
    with pytest.raises(ValueError, match=r"^column 'r': no row has 'rat'$"):
        columns_lib.columns_table([path], ["r=rate/rat"], rows="results")
    with pytest.raises(ValueError, match=r"^--where 'rn=2': no row has 'rn'$"):
        columns_lib.columns_table([path], ["backend"], rows="results", where=["rn=2"])
    with pytest.raises(ValueError, match=r"has what --where asks$"):  # Held by no row.
        columns_lib.columns_table([path], ["backend"], rows="results", where=["run=3"])


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ("b=backend:.2f", """format '.2f' does not take "mujoco" (Unknown format code 'f'"""),
        ("b=ratio:{", "format '{' does not take 0.794 (Single '{' encountered"),
    ],
)
def test_a_format_its_values_do_not_take_is_named_with_its_column(tmp_path, column, message):
    path = tmp_path / "overlap.jsonl"
    write_records(path, RUNS)
    with pytest.raises(ValueError, match=f"^column 'b': {re.escape(message)}"):
        columns_lib.columns_table([path], [column], rows="results")


def test_a_block_of_columns_is_made_from_its_words_as_the_command_would(tmp_path, capsys):
    path = tmp_path / "runs" / "overlap.jsonl"
    path.parent.mkdir()
    write_records(path, RUNS)
    words = "runs/overlap.jsonl --rows results --where run=1 --columns backend 'per round=rate'"
    page = tmp_path / "page.md"
    page.write_text(f"# Benchmarks\n\n<!-- table: {words} -->\n<!-- end table -->\nAfter.\n")
    assert table.update_page(page)
    made = columns_lib.columns_table([path], ["backend", "per round=rate"], "results", ["run=1"])
    assert made.splitlines()[2:] == [
        "| mujoco | 40,227, 39,842 |",
        "| processes | 27,381, 27,495 |",
    ]
    expected = f"# Benchmarks\n\n<!-- table: {words} -->\n{made}\n<!-- end table -->\nAfter.\n"
    assert page.read_text() == expected
    assert table.check_page(page) == []
    command = ["--rows", "results", "--where", "run=1", "--columns", "backend", "per round=rate"]
    assert table.main([str(path), *command]) == 0
    assert capsys.readouterr().out == made + "\n"
    write_records(path, [RUNS[0], dict(RUNS[1], run=1)])
    assert table.check_page(page) == [f"{page}:3: <!-- table: {words} -->"]


def test_a_block_with_a_bad_option_is_an_error_naming_its_line(tmp_path, capsys):
    write_records(tmp_path / "a.jsonl", RUNS)
    page = tmp_path / "page.md"
    page.write_text("\n<!-- table: a.jsonl --colour red --columns run -->\n<!-- end table -->\n")
    assert table.main(["--check", str(page)]) == 2
    assert f"{page}:2: unrecognized arguments: --colour red" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        table.main([str(tmp_path / "a.jsonl"), "--rows", "results"])


def test_a_line_that_is_not_json_is_named_by_file_and_line(tmp_path, capsys):
    # As a results file that a second sweep appended to after a cut last line leaves it.
    path = tmp_path / "results.jsonl"
    write_lines(path, "hopper_clipped", [3000.0, 2000.0])
    text = path.read_text()
    path.write_text(text + text.splitlines()[0][:40] + "\n" + text)
    assert table.main([str(path)]) == 2
    assert capsys.readouterr().err == f"table: error: {path}:3 is not a JSON line\n"
    assert table.main([str(path), "--columns", "seed"]) == 2
    assert capsys.readouterr().err == f"table: error: {path}:3 is not a JSON line\n"


def test_a_file_that_is_not_text_or_no_file_at_all_is_one_line(tmp_path, capsys):
    # An image given by mistake was a UnicodeDecodeError's traceback; nothing given was
    # told to give "JSON lines or a page, not both".
    image = tmp_path / "returns.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")
    assert table.main([str(image)]) == 2
    assert capsys.readouterr().err == (
        f"table: error: {image} is not a file of JSON lines: it is not text\n"
    )
    with pytest.raises(SystemExit):
        table.main([])
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.endswith("error: give either JSON lines or --update/--check PAGE, none was given")
    # The JSON lines after --columns: read as one of its columns.
    write_lines(tmp_path / "results.jsonl", "hopper_clipped", [3000.0])
    with pytest.raises(SystemExit):
        table.main(["--columns", "seed", str(tmp_path / "results.jsonl")])
    error = capsys.readouterr().err.splitlines()[-1]
    taken = repr(str(tmp_path / "results.jsonl"))
    assert error.endswith(f"none was given ({taken} was read as a column: end --columns with --)")
    assert table.main(["--columns", "seed", "--", str(tmp_path / "results.jsonl")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "| 100 |"  # write_lines' first seed.


def test_a_cut_last_line_of_a_sweep_killed_while_writing_it_is_left_out(tmp_path, capsys):
    # The sweep itself reads past it and cuts it off before it appends its next line.
    path = tmp_path / "results.jsonl"
    write_lines(path, "hopper_clipped", [3000.0, 2000.0, 1000.0])
    *whole, last = path.read_text().splitlines(keepends=True)
    path.write_text("".join(whole) + last[:50])
    note = f"table: note: {path}:3 was cut short while written; left out\n"
    assert table.main([str(path), "--reps", "100"]) == 0
    captured = capsys.readouterr()
    assert "| `hopper_clipped` | 100, 101 |" in captured.out and captured.err == note
    assert table.main([str(path), "--columns", "seed"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[2:] == ["| 100 |", "| 101 |"] and captured.err == note


def test_a_mean_of_a_list_of_lists_is_one_line(tmp_path, capsys):
    # A sweep's eval_curve holds [env steps, return, seconds] points, not numbers.
    path = tmp_path / "results.jsonl"
    write_records(path, [{"seed": 0, "eval_curve": [[160, -230.3, 19.5], [320, -222.3, 19.5]]}])
    assert table.main([str(path), "--columns", "seed", "mean(eval_curve[1:])"]) == 2
    assert capsys.readouterr().err == (
        "table: error: mean(eval_curve) takes a list of numbers; it holds [320, -222.3, 19.5]\n"
    )


def test_reps_below_one_are_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "results.jsonl"
    write_lines(path, "hopper_clipped", [3000.0, 2000.0])
    with pytest.raises(SystemExit) as exit_:
        table.main([str(path), "--reps", "0"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.endswith("error: --reps must be at least 1, got 0")


def test_a_sweeps_folder_is_read_through_its_lines_but_columns_take_files(tmp_path, capsys):
    path = tmp_path / "results.jsonl"
    write_lines(path, "hopper_clipped", [3000.0, 2000.0])
    assert table.main([str(tmp_path), "--reps", "50"]) == 0
    assert "| `hopper_clipped` | 100, 101 |" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        table.main([str(tmp_path), "--columns", "seed"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.endswith(
        f"error: --columns reads files of JSON lines: {tmp_path} is a folder; give {path}"
    )


def test_sweeps_of_one_preset_at_other_settings_make_a_row_each(tmp_path, capsys):
    # Two sweeps of `hopper_clipped`, one at another learning rate: not one preset's seeds.
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    sweeps = zip(paths, (3e-4, 1e-3), ([3000.0, 2000.0], [500.0, 700.0]), strict=True)
    for path, rate, finals in sweeps:
        write_lines(path, "hopper_clipped", finals)
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for line in lines:
            line["settings"] = {"env": "Hopper-v5", "algorithm": {"learning_rate": rate}}
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert table.main([*map(str, paths), "--reps", "50"]) == 0
    captured = capsys.readouterr()
    rows = [line.split(" | ")[:2] for line in captured.out.splitlines()[2:]]
    assert rows == [
        ["| `hopper_clipped [learning_rate=0.0003]`", "100, 101"],
        ["| `hopper_clipped [learning_rate=0.001]`", "100, 101"],
    ]
    assert captured.err == ""  # Not "listed again": they are other runs.


def test_a_presets_run_on_an_env_of_no_target_says_the_env_it_trained(tmp_path, capsys):
    # A `breakout` run given Pong's env was the row `breakout`, as if it were Breakout's.
    path = tmp_path / "results.jsonl"
    trained = [
        ("breakout", {"env": "ALE/Pong-v5"}),
        ("cheetah_clipped", {"env": "HalfCheetah-v5", "env_kwargs": {"ctrl_cost_weight": 0.0}}),
        ("hopper_clipped", {"env": "Hopper-v5"}),  # Its own: named alone.
    ]
    for config, settings in trained:
        write_lines(path, config, [1.0])
        lines = path.read_text().splitlines()
        line = json.loads(lines[-1]) | {"settings": settings}
        path.write_text("\n".join([*lines[:-1], json.dumps(line)]) + "\n")
    assert table.main([str(path), "--reps", "50"]) == 0
    rows = [row.split(" | ")[0] for row in capsys.readouterr().out.splitlines()[2:]]
    assert rows == [
        "| `breakout` on ALE/Pong-v5",
        '| `cheetah_clipped` on HalfCheetah-v5 {"ctrl_cost_weight": 0.0}',
        "| `hopper_clipped`",
    ]
