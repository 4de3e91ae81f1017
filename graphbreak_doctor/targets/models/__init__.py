"""Models the doctor ships: data (a packaged config folder) plus the code
that is really model-specific (a quantization description, a re-created
reference layer). A model package may call a framework package; a
framework package never imports a model package (``targets/frameworks/``).
"""
