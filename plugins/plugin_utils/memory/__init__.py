# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Memory across runs and hosts (issue 6): an evidence-gated lesson store on the controller.

``store`` holds the data (a directory of TinyDB JSON files, atomic writes, a file lock),
``errors`` its exceptions; lessons, selection and learning build on them (seeds 000, 002, 004).
"""
