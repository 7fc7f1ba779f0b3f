"""Decoding: greedy, beam search (paper section 6.1) and sampling over the model's decoding interface (written down as
Protocols in interface.py), steered by search controls (target prefixes, lexical constraints and glossaries, n-gram
blocking; set aside in order where they conflict) and unknown-word replacement; ensembles of
models behind that interface; teacher-forced scoring of given translations; the streaming engine (text in, text
out); word alignments and attention maps from one teacher-forced pass after the search; CPU copies of a model for
faster decoding; the run limit's rule in a file of its own that imports only torch (repeat_runs.py: the Hugging
Face export ships it). Other engines' formats (export, import) live in `transformer.interop`, which may import this.

Imports the model's decoding interface, `transformer.data` (tokenizer, batching) and the shared modules: nothing of
training.
"""
