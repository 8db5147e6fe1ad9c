"""The experience-store example of docs/experience-store.md, as written, on the three
backends.

The example's Python block is run with its store target replaced by ``""`` (in memory), a
SQLite file and a PostgreSQL DSN, and a fixed clock (the example leaves timestamps to the
clock, so episodes recorded a second apart would differ). Every expression statement in its
``with`` block is collected: the three tables of results must be equal, element for element
(floats bit for bit), and equal to what the example's comments say.
"""

import ast
import re

import pytest
from doc_pages import after_heading

SECTION = after_heading("The experience store from Python")
EXAMPLE = re.search(r"```python\n(.*?)```", SECTION, re.S).group(1)
T0 = 1_767_225_600.0


def _instrumented(target_name: str) -> ast.Module:
    """The example with the store target a variable, a fixed clock, and each expression
    statement of the ``with`` body appended to ``results`` (source text, value)."""
    tree = ast.parse(EXAMPLE)
    with_stmt = next(n for n in tree.body if isinstance(n, ast.With))
    call = with_stmt.items[0].context_expr
    assert isinstance(call, ast.Call) and call.func.id == "ExperienceStore"
    call.args[0] = ast.Name(target_name, ast.Load())
    call.keywords.append(ast.keyword("clock", ast.parse(f"lambda: {T0!r}").body[0].value))
    body = []
    for stmt in with_stmt.body:
        if isinstance(stmt, ast.Expr):
            stmt = ast.parse(f"results.append(({ast.unparse(stmt.value)!r}, None))").body[0]
            stmt.value.args[0].elts[1] = with_stmt.body[len(body)].value
        body.append(stmt)
    with_stmt.body = body
    return ast.fix_missing_locations(tree)


def run_example(target) -> list:
    results: list = []
    exec(compile(_instrumented("TARGET"), "docs/experience-store.md example", "exec"),
         {"TARGET": str(target), "results": results})
    out = []
    for source, value in results:
        if source.startswith("store.dispatch('get_stats'"):
            value = {k: v for k, v in value.items() if k not in ("store", "persistent")}
        out.append((source, value))
    return out


def test_readme_store_example_same_results_on_memory_sqlite_postgresql(tmp_path, pg_store_dsn):
    tables = {name: run_example(target) for name, target in
              [("memory", ""), ("sqlite", tmp_path / "experience.db"),
               ("postgresql", pg_store_dsn)]}
    assert tables["memory"] == tables["sqlite"] == tables["postgresql"]
    values = dict(tables["postgresql"])
    comp = values["store.get_competence('acme', 'refund')"]["competence"][0]
    # what the example's comments say: Beta(31, 11), mean 0.738, 95% [0.597, 0.858]
    assert (comp["a"], comp["b"]) == (31.0, 11.0)
    assert (round(comp["mean"], 3), round(comp["lower"], 3), round(comp["upper"], 3)) == \
        (0.738, 0.597, 0.858)
    assert values["store.get_recommendation('acme', 'refund')['best']['action_type']"] == \
        "lookup_order"
    sim = values["store.query_similar('acme', k=3, state_before={'ticket': 'refund #7', "
                 "'channel': 'email'})"]["results"]
    assert sim[0]["episode"]["id"] == 7 and sim[0]["score"] == pytest.approx(1.0)
    assert values["store.should_escalate('acme', 'refund', threshold=0.8, min_episodes=10)"
                  "['escalate']"] is True
    assert values["store.dispatch('get_stats', tenant_id='acme')"]["n_records"] == 40
