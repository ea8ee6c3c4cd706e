"""``rcb fit MARKET --setting sc|mc --out MODEL_DIR``: from a market's train days, the model to serve on it.

One concept a module (each imports only those before it in this list):

* :mod:`~training.fit.rule`: the choice among candidates' validation rows, fixed in code before any figure is read;
* :mod:`~training.fit.intervals`: a candidate's rows over the held-out days, and their bootstrap intervals;
* :mod:`~training.fit.workdir`: the work directory a rerun resumes from, and the keys of what it caches;
* :mod:`~training.fit.estimate`: how long a fit takes, from the market's size;
* :mod:`~training.fit.candidates`: the candidates, each fitted on the train days less the held-out ones and played
  there as it would be served;
* :mod:`~training.fit.runs`: CBRL's runs on those days, resumed or kept where finished, exported as one candidate;
* :mod:`~training.fit.plays`: each candidate's episodes on the held-out days, cached;
* :mod:`~training.fit.report`: the table, the plot and the card's ``fit`` section;
* :mod:`~training.fit.serving`: the chosen candidate fitted on all the train days and written as the model directory;
* :mod:`~training.fit.fit`: the whole fit, step by step.
"""
