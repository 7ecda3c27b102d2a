"""The report command builds every table and figure from a small fixture of result files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixture_results import write_fixture, write_run, questions

from specharness import metrics, stats
from specharness.results import read_results

EVERYTHING = ["table1.md", "table1.tex", "detail.md", "detail.tex", "acceptance.md", "acceptance.tex", "table2.md", "table2.tex",
              "cost_model.md", "cost_model.tex", "identity.md", "identity.tex",
              "paired_tests.md", "oracle_vs_eta.md",
              "looping.md", "looping.tex", "table1_noloop.md", "table1_noloop.tex",
              "oracle_vs_eta.tex", "best_eta.md", "best_eta.tex", "data_scaling.md", "data_scaling.tex",
              "report.md", "report.json"] + [
    f"{name}.{ext}" for name in ("fig1a_ctar", "fig1b_speedup", "fig3a_exit_layer", "fig3b_eta", "fig_data_scaling")
    for ext in ("png", "pdf")]


def run_report(argv):
    from specharness.cli import main
    return main(["report", *argv])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    files = write_fixture(d, per_subtask=3)
    out = tmp_path_factory.mktemp("report")
    assert run_report([str(d), "--out", str(out)]) == 0
    return files, out, json.loads((out / "report.json").read_text())


def test_every_table_and_figure_is_written(built):
    _, out, data = built
    for name in EVERYTHING:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    for name in EVERYTHING:
        head = (out / name).read_bytes()[:8]
        if name.endswith(".png"):
            assert head.startswith(b"\x89PNG")
        if name.endswith(".pdf"):
            assert head.startswith(b"%PDF")
    assert data["notes"] == []  # nothing was skipped


def test_table1_numbers_match_the_statistics(built):
    files, out, data = built
    _, kang = read_results(files["kangaroo"])
    _, van = read_results(files["vanilla"])
    math_recs = [r for r in kang if r.subtask == "math_reasoning"]
    expected = stats.speedup_ci(stats.pair(math_recs, van))
    row = data["table1"][next(k for k in data["table1"] if k.startswith("kangaroo (") and "adapter=default" in k
                              and "eta=0.6" in k and "gamma=6" in k and "exit_layer=2" in k)]
    assert row["math_reasoning"]["speedup"]["value"] == pytest.approx(expected.value)
    assert row["math_reasoning"]["speedup"]["low"] == pytest.approx(expected.low)
    assert row["math_reasoning"]["cr"]["value"] == pytest.approx(metrics.compression_rate(math_recs))
    md = (out / "table1.md").read_text()
    assert expected.fmt(2, "×") in md
    header = md.splitlines()[2]
    for col in ("MT-bench", "Translation", "Summarization", "QA", "Math", "RAG", "Avg."):
        assert col in header
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")][1:]
    # main runs only: vanilla, kangaroo, early_exit and kangaroo-oracle, each at its declared defaults
    # (the oracle files differ in gamma; the default their headers record, 6, picks one), and both EAGLE heads
    # (no declared defaults, and neither head is the more common: every file of the method)
    assert len(lines) == 6 and lines[0].startswith("| vanilla")
    assert sum(ln.startswith("| eagle") for ln in lines) == 2
    assert sum(ln.startswith("| kangaroo-oracle") for ln in lines) == 1
    assert "†" in md  # the fixture's vanilla has one unstable question
    tex = (out / "table1.tex").read_text()
    assert "\\begin{tabular}" in tex and "early\\_exit" in tex and "\\multicolumn{2}{c}{Math}" in tex


def test_cost_model_recovers_the_simulated_costs(built):
    """The fixture's rounds cost draft_cost x k + STEP (1 + 0.05 k): the fit must find exactly that,
    and the predicted speedup must sit within the timing noise of the measured one."""
    from fixture_results import STEP
    files, out, data = built
    label = next(k for k in data["cost_model"] if k.startswith("kangaroo (") and "adapter=default" in k
                 and "eta=0.6" in k and "gamma=6" in k and "exit_layer=2" in k)
    cm = data["cost_model"][label]
    assert cm["draft_step_s"] == pytest.approx(STEP * 3.5 / 30, rel=1e-3)
    assert cm["draft_fixed_s"] == pytest.approx(0.0, abs=1e-5)  # files keep microseconds
    assert cm["verify_per_position_s"] == pytest.approx(0.05 * STEP, rel=1e-3)
    assert cm["vanilla_step_s"] == pytest.approx(STEP + 1e-4, rel=1e-3)
    assert abs(cm["gap"]) < 0.05 and cm["predicted_speedup"] > 0
    assert "Predicted speedup" in (out / "cost_model.md").read_text()
    assert "Extra params" in (out / "table1.md").read_text() and "1.00M" in (out / "table1.md").read_text()


def test_detail_table_has_every_subtask_with_intervals(built):
    files, out, data = built
    _, kang = read_results(files["kangaroo"])
    d = data["detail"][next(k for k in data["detail"] if "adapter=default" in k)]
    assert set(d) == {"multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag", "overall"}
    math_recs = [r for r in kang if r.subtask == "math_reasoning"]
    assert d["math_reasoning"]["ctar"][:2] == pytest.approx([metrics.ctar(math_recs, 1), metrics.ctar(math_recs, 2)])
    assert len(d["overall"]["ctar"]) == 6  # w = 1..gamma
    tps = d["overall"]["tokens_per_s"]
    assert tps["value"] == pytest.approx(metrics.throughput(kang))
    assert tps["low"] < tps["value"] < tps["high"]
    assert "| vanilla | MT-bench | 3 |" in (out / "detail.md").read_text()


def test_acceptance_table_explains_the_speedups(built):
    files, out, data = built
    _, kang = read_results(files["kangaroo"])
    _, van = read_results(files["vanilla"])
    row = data["acceptance"][next(k for k in data["acceptance"] if "adapter=default" in k)]
    assert row["ctar"][0] == pytest.approx(metrics.ctar(kang, 1))
    assert row["break_even_draft"] == pytest.approx(metrics.break_even_acceptance(kang, van))
    assert (out / "acceptance.md").read_text().count("| ") >= 4


def test_table2_has_one_row_per_adapter_variant(built):
    _, out, _ = built
    md = (out / "table2.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| kangaroo")]
    assert len(rows) == 3
    assert any("adapter=ffn" in r and "2.300M" in r for r in rows)
    assert any("adapter=separate-head" in r and "21.56%" in r for r in rows)


def test_sweeps_cover_the_fixture(built):
    _, out, data = built
    sweep = data["fig3a"]["kangaroo"]
    assert sweep["exit_layer"] == [1, 2, 4, 6]
    # the fixture's acceptance grows with depth and its draft cost is (l + 1.5) / 30 of a step
    assert sweep["acceptance"] == sorted(sweep["acceptance"])
    assert sweep["break_even_draft"] == pytest.approx([(l + 1.5) / 30 for l in sweep["exit_layer"]], rel=0.05)
    etas = data["fig3b"]
    assert sorted(etas) == ["kangaroo, γ=4", "kangaroo, γ=6", "kangaroo, γ=8"]
    assert all(v["eta"] == [0.0, 0.3, 0.6, 0.9] for v in etas.values())
    oracle = (out / "oracle_vs_eta.md").read_text()
    assert oracle.count("| kangaroo-oracle") == 3 and "(no η=0.6 file)" not in oracle
    best = (out / "best_eta.md").read_text()
    assert sum(ln.startswith("| kangaroo") for ln in best.splitlines()) == 3 * 7  # 3 gammas x (6 subtasks + avg)


def test_paired_tests_cover_methods_and_every_setting_against_its_main_file(built):
    """A sweep's settings are each tested against the method's main file, question by question, with the
    same statistic as a pair of methods (and a pair of methods still gets its row)."""
    files, out, data = built
    pairs = data["paired_tests"]
    kinds = {p["kind"] for p in pairs.values()}
    assert kinds == {"methods", "settings"}
    main = next(p["b"] for p in pairs.values() if p["kind"] == "settings" and "eta=0.9" in p["a"]
                and "gamma=4" in p["a"])
    assert "eta=0.6" in main and "gamma=6" in main  # the sweep's settings are paired with the declared defaults
    row = next(p for p in pairs.values() if p["kind"] == "settings" and "eta=0.9" in p["a"] and "gamma=4" in p["a"])
    expected = stats.paired_test(read_results(files["kangaroo-g4-e0.9"])[1], read_results(files["kangaroo"])[1])
    assert row["questions"] == expected.n
    assert row["a_over_b_speed"] == pytest.approx(expected.a_over_b_speed)
    assert row["p_two_sided"] == pytest.approx(expected.p_two_sided)
    assert f"| {row['a']} | {row['b']} |" in (out / "paired_tests.md").read_text()


def test_missing_data_skips_with_a_note(tmp_path, capsys):
    qs = questions(2)
    write_run(tmp_path / "vanilla.jsonl", "vanilla", {}, qs)
    write_run(tmp_path / "m.jsonl", "kangaroo", {"eta": 0.6}, qs, gamma=3, accept=0.5, draft_cost=0.002)
    out = tmp_path / "out"
    assert run_report([str(tmp_path / "vanilla.jsonl"), str(tmp_path / "m.jsonl"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for fig in ("Figure 3(a) skipped", "Figure 3(b) skipped", "Table 2 (ablation) skipped",
                "data-scaling section skipped"):
        assert fig in printed
    assert (out / "table1.md").is_file() and (out / "fig1b_speedup.png").is_file()
    assert not (out / "fig3a_exit_layer.png").exists()


def test_without_vanilla_speedups_are_blank_not_a_crash(tmp_path):
    write_run(tmp_path / "m.jsonl", "kangaroo", {"eta": 0.6}, questions(2), gamma=3, accept=0.5, draft_cost=0.002)
    out = tmp_path / "out"
    assert run_report([str(tmp_path / "m.jsonl"), "--out", str(out)]) == 0
    assert "Figure 1(b) skipped" in (out / "report.md").read_text()


def test_end_of_run_summary_shows_intervals_and_unstable_flags(tmp_path, capsys):
    from specharness.summary import print_summary, summary_rows
    qs = questions(2)
    van = write_run(tmp_path / "vanilla.jsonl", "vanilla", {}, qs, unstable_ids=(qs[0][0],))
    m = write_run(tmp_path / "m.jsonl", "kangaroo", {"eta": 0.6}, qs, gamma=3, accept=0.6, draft_cost=0.002)
    rows = {(r["method"], r["subtask"]): r for r in summary_rows([van, m])}
    over = rows[("kangaroo", "overall")]
    assert over["speedup_ci"].low < over["speedup"] < over["speedup_ci"].high
    assert over["baseline_unstable"] == 1 and rows[("vanilla", "multi_turn")]["unstable"] == 1
    assert rows[("kangaroo", "qa")]["unstable"] == 0 and rows[("kangaroo", "qa")]["baseline_unstable"] == 0
    print_summary([van, m])
    out = capsys.readouterr().out
    assert "UNSTABLE 1/2" in out and "its vanilla 1/2" in out and over["speedup_ci"].fmt(3, "x") in out


def test_identity_table_flags_a_changed_token(tmp_path):
    d = tmp_path / "runs"
    files = write_fixture(d, per_subtask=1)
    path = files["early_exit"]
    lines = path.read_text().splitlines()
    rec = json.loads(lines[0])
    rec["choices"][0]["token_ids"][0][2] += 1  # one wrong token in the first turn of one question
    path.write_text("\n".join([json.dumps(rec), *lines[1:]]) + "\n")
    assert run_report([str(d), "--out", str(tmp_path / "out")]) == 0
    data = json.loads((tmp_path / "out" / "report.json").read_text())["identity"]
    ee = data[next(k for k in data if k.startswith("early_exit"))]
    assert ee["identical"] == ee["turns"] - 1
    assert ee["first_difference"] == f"question {rec['question_id']} turn 1 token 2"
    kg = [v for k, v in data.items() if k.startswith("kangaroo (")]
    assert kg and all(v["identical"] == v["turns"] for v in kg)


def _shipped_and_old(d, command: str = "python -m specharness compare (fixture)", old: bool = True,
                     options: dict | None = None) -> None:
    """vanilla, Kangaroo with the shipped adapter (adapter '') and, when ``old``, with another one, in ``d``;
    ``options``: more options both Kangaroo runs share."""
    qs, shared = questions(1), options or {}
    write_run(d / "vanilla.jsonl", "vanilla", {}, qs, command=command)
    write_run(d / "shipped.jsonl", "kangaroo", {"adapter": "", **shared}, qs, gamma=2, accept=0.5, command=command)
    if old:
        write_run(d / "old.jsonl", "kangaroo", {"adapter": "/cache/adapters/old", **shared}, qs, gamma=2, accept=0.4,
                  command=command)


def test_certification_is_found_by_file_and_by_an_older_files_label(tmp_path):
    """certify names each result file: the report finds its verdict whatever the labels are now; a certify
    file from before that is read by label, with an empty option value in its old form ('adapter=')."""
    _shipped_and_old(tmp_path)
    verdict = {"turns": 7, "identical": 6, "near_tie": 1, "bug": 0}
    (tmp_path / "identity_certified.json").write_text(json.dumps({
        "a label no longer given": {**verdict, "file": "old.jsonl"},
        "kangaroo (adapter=)": {**verdict, "near_tie": 2}}))  # an older certify file's entry: no file name
    assert run_report([str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    data = json.loads((tmp_path / "out" / "report.json").read_text())["identity"]
    assert data["kangaroo (adapter=old)"]["certified"]["near_tie"] == 1
    assert data["kangaroo (adapter='')"]["certified"]["near_tie"] == 2


def test_two_runs_reported_together_are_paired_and_certified_each_within_itself(tmp_path):
    """Two folders of the same methods: no paired test crosses them (their times were not interleaved),
    files of one name get their folder in the label, each keeps its own folder's certify verdict, and a
    label with an empty value stays two straight quotes in LaTeX."""
    from specharness.report.render import tex
    for name, cmd, n_tie in (("a", "compare A", 1), ("b", "compare B", 5)):
        d = tmp_path / name
        d.mkdir()
        _shipped_and_old(d, cmd, old=name == "a")
        verdict = {"turns": 7, "identical": 6, "near_tie": n_tie, "bug": 0, "file": "shipped.jsonl"}
        (d / "identity_certified.json").write_text(json.dumps({"kangaroo": verdict}))  # as certify labelled it there
    out = tmp_path / "out"
    assert run_report([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    data = json.loads((out / "report.json").read_text())
    pairs = list(data["paired_tests"].values())
    assert pairs and all(Path(p["a_file"]).parent == Path(p["b_file"]).parent for p in pairs)
    [old] = [p for p in pairs if p["kind"] == "settings"]
    assert Path(old["a_file"]).name == "old.jsonl" and Path(old["b_file"]) == tmp_path / "a" / "shipped.jsonl"
    ties = {k: v["certified"]["near_tie"] for k, v in data["identity"].items() if v["certified"]}
    assert ties == {"kangaroo (adapter='') [a/shipped]": 1, "kangaroo (adapter='') [b/shipped]": 5}, ties
    assert tex("kangaroo (adapter='')") == "kangaroo (adapter=\\textquotesingle\\textquotesingle{})"


def test_a_file_that_mixes_hardware_is_warned_about_and_grouped(tmp_path):
    d = tmp_path / "runs"
    files = write_fixture(d, per_subtask=1)
    path = files["early_exit"]
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    for i, rec in enumerate(recs):  # as a Ray run over two kinds of node would write them
        rec["worker"] = {"node": f"node{i % 2}", "device": "cpu-x" if i % 2 else "cpu-y", "threads": 1}
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert run_report([str(d), "--out", str(tmp_path / "out")]) == 0
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert any("mixes hardware (2 kinds)" in n and n.startswith("early_exit") for n in data["notes"])
    table = (tmp_path / "out" / "hardware.md").read_text()
    assert "node0 / cpu-y / 1 threads" in table and "node1 / cpu-x / 1 threads" in table
    assert not any("kangaroo" in n and "mixes" in n for n in data["notes"])


def test_data_scaling_pairs_each_checkpoints_training_with_its_cr(tmp_path):
    """Two Kangaroo checkpoints trained on 256 and 1024 conversations (their headers say so) and an
    EAGLE head of one size only: the section shows Kangaroo's two points, CR from the runs, and the
    off-policy gap from the training summaries; EAGLE, with one size, has no curve."""
    import json
    qs = questions(2)
    write_run(tmp_path / "vanilla.jsonl", "vanilla", {}, qs)
    for n, accept, top1 in ((256, 0.2, 0.30), (1024, 0.7, 0.45)):
        info = {"training": {"train_conversations": n, "held_out_conversations": 55, "top1": top1,
                             "top1_own_prefix": top1 - 0.1, "positions": 900}}
        write_run(tmp_path / f"k{n}.jsonl", "kangaroo", {"adapter": f"/ckpt/k{n}"}, qs, gamma=4, accept=accept,
                  draft_cost=0.002, drafter_info=info)
    write_run(tmp_path / "e.jsonl", "eagle", {"head": "/ckpt/e"}, qs, gamma=4, accept=0.5, draft_cost=0.002,
              drafter_info={"training": {"train_conversations": 256, "top1": 0.4}})
    out = tmp_path / "out"
    assert run_report([str(tmp_path), "--out", str(out)]) == 0
    md = (out / "data_scaling.md").read_text()
    assert "| kangaroo | 256 |" in md and "| kangaroo | 1024 |" in md and "eagle" not in md
    assert "10.0%" in md  # the off-policy gap, top1 - own prefix
    assert (out / "fig_data_scaling.png").is_file()
    points = json.loads((out / "report.json").read_text())["data_scaling"]["kangaroo"]
    assert [p["train_conversations"] for p in points] == [256, 1024]
    assert points[1]["cr"]["value"] > points[0]["cr"]["value"]  # more accepted drafts, higher CR


# ---- looping turns ---------------------------------------------------------------------------
def test_without_looping_turns_table1_is_the_same_when_nothing_loops(built):
    _, out, data = built
    assert data["table1_noloop"] == data["table1"]  # no turn of the fixture loops: the same turn set
    assert "| All | 21 | 0 | 0.0% |" in (out / "looping.md").read_text()


def test_looping_turns_are_shared_and_left_out_of_the_second_table(tmp_path):
    """Three turns of vanilla's output loop, where the method runs 5x faster: the looping table counts
    them per subtask, and Table 1 without them is the same bootstrap on the remaining turns."""
    qs = questions(3)
    looping = (("qa-0", 0), ("qa-1", 0), ("multi_turn-0", 1))
    van = write_run(tmp_path / "vanilla.jsonl", "vanilla", {}, qs, looping=looping)
    pld = write_run(tmp_path / "pld.jsonl", "pld", {}, qs, gamma=3, accept=0.3, draft_cost=0.0005,
                    looping=looping, loop_time=0.2)
    out = tmp_path / "out"
    assert run_report([str(tmp_path), "--out", str(out)]) == 0
    share = (out / "looping.md").read_text()
    assert "| QA | 3 | 2 | 66.7% |" in share and "| MT-bench | 6 | 1 | 16.7% |" in share
    assert "| Math | 3 | 0 | 0.0% |" in share and "| All | 21 | 3 | 14.3% |" in share
    assert "8-gram" in share and "0.3" in share  # the definition, with n and the threshold, is in the caption
    data = json.loads((out / "report.json").read_text())
    assert data["looping"]["vanilla"]["looping_turns"] == [["multi_turn-0", 2], ["qa-0", 1], ["qa-1", 1]]
    full, noloop = data["table1"]["pld"], data["table1_noloop"]["pld"]
    assert noloop["qa"]["speedup"]["value"] < full["qa"]["speedup"]["value"] / 2  # the loops made QA look fast
    assert noloop["math_reasoning"] == full["math_reasoning"]  # nothing loops there
    assert noloop["qa"]["n"] == 1 and noloop["multi_turn"]["n"] == 3  # a question keeps its other turn
    _, p_recs = read_results(pld)
    _, v_recs = read_results(van)
    cut = lambda recs: [r.only_turns({0}) if r.question_id == "multi_turn-0" else r  # noqa: E731
                        for r in recs if r.question_id not in ("qa-0", "qa-1")]
    expected = stats.speedup_ci(stats.pair([r for r in cut(p_recs) if r.subtask == "multi_turn"], cut(v_recs)))
    assert noloop["multi_turn"]["speedup"]["value"] == pytest.approx(expected.value)
    assert noloop["multi_turn"]["speedup"]["low"] == pytest.approx(expected.low)
    assert expected.fmt(2, "×") in (out / "table1_noloop.md").read_text()
    assert "Without looping turns: the 3 of 21 turns" in (out / "table1_noloop.md").read_text()
    # a stricter test finds no loop: the second table is the first again
    strict = tmp_path / "strict"
    assert run_report([str(tmp_path), "--out", str(strict), "--loop-ngram", "1", "--loop-threshold", "1"]) == 0
    data = json.loads((strict / "report.json").read_text())
    assert data["looping"]["vanilla"]["overall"]["looping"] == 0 and data["table1_noloop"] == data["table1"]


def test_without_token_ids_the_report_says_looping_could_not_be_computed(tmp_path):
    qs = questions(2)
    van = write_run(tmp_path / "vanilla.jsonl", "vanilla", {}, qs)
    write_run(tmp_path / "m.jsonl", "kangaroo", {"eta": 0.6}, qs, gamma=3, accept=0.5, draft_cost=0.002)
    recs = [json.loads(line) for line in van.read_text().splitlines()]
    for rec in recs:  # a foreign file: Spec-Bench's answer records carry no token ids
        del rec["choices"][0]["token_ids"]
    van.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "out"
    assert run_report([str(tmp_path), "--out", str(out)]) == 0
    assert "looping could not be computed for vanilla" in (out / "report.md").read_text()
    assert (out / "table1.md").is_file() and not (out / "table1_noloop.md").exists()


@pytest.mark.parametrize("flag, value", [("--loop-ngram", "0"), ("--loop-ngram", "-3"), ("--loop-ngram", "2.5"),
                                         ("--loop-threshold", "0"), ("--loop-threshold", "1.5"),
                                         ("--loop-threshold", "-0.1"), ("--loop-threshold", "nan"),
                                         ("--loop-threshold", "x")])
def test_bad_looping_options_are_one_line_errors(tmp_path, capsys, flag, value):
    assert run_report([str(tmp_path), "--out", str(tmp_path / "out"), flag, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specharness: error: ") and flag in err and value in err
    assert not (tmp_path / "out").exists()  # refused before any work


def test_an_empty_option_value_is_labelled_as_empty_and_a_path_by_its_name(tmp_path):
    """The shipped checkpoint (adapter '') against another one: the labels say which is which, and an
    option both share (eta) stays out of them."""
    from specharness.report.runs import select_runs
    _shipped_and_old(tmp_path, options={"eta": 0.6})
    labels = {r.path.stem: r.label for r in select_runs([tmp_path])}
    assert labels == {"vanilla": "vanilla", "shipped": "kangaroo (adapter='')", "old": "kangaroo (adapter=old)"}


def test_table1_quotes_each_vanillas_speed_when_several_are_baselines(tmp_path):
    """Two vanilla files under different settings, each the baseline of its own rows: the caption
    names both speeds, not only the first file's."""
    qs = questions(2)
    write_run(tmp_path / "v24.jsonl", "vanilla", {}, qs, tokens=24)
    write_run(tmp_path / "v48.jsonl", "vanilla", {}, qs, tokens=48, seed=1)
    assert run_report([str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    caption = (tmp_path / "out" / "table1.md").read_text().split("\n")[0]
    assert caption.count("Vanilla: ") == 1 and caption.count(" tokens/s") == 1 and "; " in caption.split("Vanilla: ")[1]
