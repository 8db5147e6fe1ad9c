"""Play a few random episodes through Gymnasium's ``RecordEpisodeStatistics``."""


def play_recorded(wrapped, episodes: int = 3) -> None:
    """Reset ``wrapped`` (a ``RecordEpisodeStatistics`` env) at seed 0 and play
    ``episodes`` episodes of random actions, asserting each records its length."""
    wrapped.reset(seed=0)
    for _ in range(episodes):
        done = False
        while not done:
            _, _, term, trunc, info = wrapped.step(wrapped.action_space.sample())
            done = term or trunc
        assert info["episode"]["l"] >= 1
        wrapped.reset()
