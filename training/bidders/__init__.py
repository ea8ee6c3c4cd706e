"""Bidders: every method behind one interface (:class:`training.bidders.base.Bidder`)."""
