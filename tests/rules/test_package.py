import wayline.rules

PUBLIC = {
    "AfterMatchSkip", "Alternation", "Automaton", "Concatenation", "Define", "Match", "MatcherSize",
    "Measure", "OutputColumn", "PartitionMatcher", "Pattern", "PatternSpec", "Quantified", "SkipTo",
    "Variable", "compile_automaton", "parse_match_recognize", "parse_pattern",
}


def test_the_package_lists_its_public_names() -> None:
    assert set(wayline.rules.__all__) == PUBLIC
    for name in PUBLIC:
        assert hasattr(wayline.rules, name)
