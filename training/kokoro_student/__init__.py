"""Distilling Kokoro's waveform generator into a small student (issue 31).

Development only: nothing under ``training/`` is imported by rtts at run time, and its
dependency (PyTorch) is the ``train`` extra. The pipeline: ``texts`` gathers training
sentences from Debian packages (never the evaluation sentences), ``teacher`` runs rtts's
own Kokoro cut over them and keeps the generator's inputs and the teacher's audio,
``train`` fits the student, ``export`` writes it as ONNX for ``rtts.engines.kokoro_student``.
"""
