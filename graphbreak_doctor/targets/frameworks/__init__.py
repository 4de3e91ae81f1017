"""Serving frameworks: how a server builds, compiles and runs a model.

A framework is one package here (``sglang/``): the launch arguments read
by the framework's own parser, its runtime set-up, its model built through
its own loader from a config folder, the forward state of each phase it
runs, and the discovery of what it compiles (the compile map). A framework
package imports no model package (``targets/models/``): what it needs of
the served model comes from the model's config folder, read by the
framework itself, or from the provider that calls it (a plain record).
"""
