"""Wrote tests/data/store_v1.sqlite with dyna at 96f1a68 (schema version 1); kept as a record."""
import numpy as np
from dyna.experience import ExperienceStore
p = "tests/data/store_v1.sqlite"
s = ExperienceStore(p, dim=4, clock=lambda: 1000.0)
rng = np.random.default_rng(7)
for i in range(6):
    s.record("acme", task_type=["triage", "billing"][i % 2], action_type=["ask", "fix", "escalate"][i % 3],
             outcome="success" if i % 3 != 1 else "failure", reward=float(i) / 2, timestamp=1000.0 + i,
             state_before={"step": i, "api_key": "sk-secret" if i == 0 else "none"},
             state_features=[float(i + 1), 0.5, -1.0 * i, 2.0])
s.record("globex", task_type="triage", action_type="ask", outcome="success", reward=1.0,
         timestamp=2000.0, state_features=[1.0, 1.0, 1.0, 1.0])
s.record("acme", task_type="tmp", action_type="ask", outcome="failure", reward=0.0, timestamp=999.0,
         state_features=[0.0, 0.0, 1.0, 0.0])
s.delete_data("acme", task_type="tmp")
s.compact()
print(s.get_stats()["n_records"], s.get_competence("acme"))
print(s.query_similar("acme", k=3, state_features=[1, 0.5, 0, 2]))
s.close()
