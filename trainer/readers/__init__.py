"""One reader per table of the data contract, each with its tokenisation stage:

    trajectories   trajectory documents (SAD's LM rows; tool calls are MCH steps)
    repairs        repair documents read beside their trajectories (critique + fix trained,
                   the wrong call an ERROR span and an MCH step labelled 0)
    safety         the chosen side of `safety` preference pairs as SAD documents (prompt
                   untrained), each read with one trajectory of its chunk
    preferences    DPO's Ray Data stream of tokenised pairs, and SAD's MCH negatives (the
                   text the pipeline wrote for each negative pair, never a re-rendering)
    consistency    the consistency filter's verdicts: a stage before the pools keeps the
                   rollouts it kept (and the repairs and pairs made from them), per chunk

The SAD feed (trainer.data) is a Ray Data stream over trajectories/ whose stage calls the
repairs and preferences readers on the paired shards of the same chunk, so every pool mixes
the tables in the dataset's proportion; the DPO feed is the preferences reader's own stream.
No reader imports torch or transformers (Ray Data workers import them).
"""
