"""The flannel charm's logic: plain modules, no hook tools and no charmhelpers.

Only reactive/flannel.py talks to Juju; everything here is testable on any host.
"""
