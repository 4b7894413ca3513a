"""The cluster report read from the catalog alone: its model, the self-contained HTML page and
its inline SVG charts.
"""
