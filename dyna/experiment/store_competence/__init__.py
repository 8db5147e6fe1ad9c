"""``dyna store competence``: the competence path of an experience store, drawn (see
:mod:`dyna.experiment.store_competence.cli`)."""
