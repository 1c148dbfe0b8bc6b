"""One video into model inputs, the path that training, evaluation, the served model and `vidtx predict`
share: which frames make a clip (`sampling`), the test-time crops (`crops`), the one normalisation
(`normalize`), and an encoded video's test views and logits (`views`). No webdataset, no training
augmentation (`vidtx.data.transforms`), no Ray: what a serving container loads.
"""
