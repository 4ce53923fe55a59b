"""The demo VLMs' training (mai-train-demo), by concern: recipes.py (what each model is trained
with), corpus.py (easy-vqa loaded, the questions drawn, the padded batches), progress.py (the
progress bars), validation.py (the checks and the validation report), phases.py (the training
phases), trainer.py (one model's whole training, its checkpoint and report), cli.py (the command).
Imports run one way: cli -> trainer -> phases -> validation -> corpus -> recipes."""
