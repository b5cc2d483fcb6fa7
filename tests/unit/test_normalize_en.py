"""Golden table for the English normalizer: what a person says for each written form."""

import pytest

from rtts.text.normalize_en import normalize_en

GOLDEN = [
    ('The museum closes at 5:30 pm on Sundays.', 'The museum closes at five thirty P M on Sundays.'),
    ('It costs $7.99 per month, or $79 per year.', 'It costs seven dollars and ninety-nine cents per month, or seventy-nine dollars per year.'),
    ('Please proceed to counter 3.', 'Please proceed to counter three.'),
    ('The meeting has moved to Thursday, June 12th.', 'The meeting has moved to Thursday, June twelfth.'),
    ('Dr. Smith lives at 221 Baker St.', 'Doctor Smith lives at two hundred twenty-one Baker Street.'),
    ('Open 9am-5pm, Mon. to Fri.', 'Open nine eigh M to five P M, Monday to Friday.'),
    ('Flight UA857 departs from gate B12 at 10:05.', 'Flight U eigh eight five seven departs from gate B twelve at ten oh five.'),
    ('Seats 14A to 14F are in row 14.', 'Seats fourteen eigh, to fourteen F are in row fourteen.'),
    ('Gates B1-B5 are closed.', 'Gates B one, to B five are closed.'),
    ('Seats 14A and 14F.', 'Seats fourteen eigh and fourteen F.'),
    ('Call (415) 555-0100.', 'Call four one five, five five five, zero one zero zero.'),
    ('Call 800-555-0199 now.', 'Call eight hundred, five five five, zero one nine nine now.'),
    ('Temperatures of 20°C to 25°C.', 'Temperatures of twenty degrees Celsius to twenty-five degrees Celsius.'),
    ('Speed limit 100 km/h.', 'Speed limit one hundred kilometers per hour.'),
    ('Prices rose 3.5% in 2025.', 'Prices rose three point five percent in twenty twenty-five.'),
    ('The FBI met at the UN.', 'The F B I met at the U N.'),
    ('NASA launched it.', 'NASA launched it.'),
    ('It was 2026-11-29.', 'It was November twenty-ninth, twenty twenty-six.'),
    ('He was born in 1999.', 'He was born in nineteen ninety-nine.'),
    ('Rooms 5-10.', 'Rooms five to ten.'),
    ('€5 or £3.20', 'five euros or three pounds and twenty pence'),
    ('$2.5 million', 'two point five million dollars'),
    ('Add 1/2 cup.', 'Add one half cup.'),
    ('It is -5 outside.', 'It is minus five outside.'),
    ('the 3rd time', 'the third time'),
    ('1,234,567 people', 'one million two hundred thirty-four thousand five hundred sixty-seven people'),
    ('No. 5 please', 'Number five please'),
    ('Doors open at 10:00.', "Doors open at ten o'clock."),
    ('Two USB ports.', 'Two U S B ports.'),
    ('See you at 9 a.m. tomorrow.', 'See you at nine eigh M tomorrow.'),
    ('OK, thanks.', 'okay, thanks.'),
    ('A big day.', 'A big day.'),
    ('I am here.', 'I am here.'),
    ('Pi is 3.14.', 'Pi is three point one four.'),
    ('The 21st century.', 'The twenty-first century.'),
    ('The 1st and 2nd floors.', 'The first and second floors.'),
    ('On 3/15/2026 we met.', 'On March fifteenth, twenty twenty-six we met.'),
    ('March 3rd, 2026', 'March third, twenty twenty-six'),
    ('Born on 4 July 1976.', 'Born on the fourth of July nineteen seventy-six.'),
    ('It weighs 5 kg.', 'It weighs five kilograms.'),
    ('Walk 1 km.', 'Walk one kilometer.'),
    ('It was 2005.', 'It was two thousand five.'),
    ('In 1900 and 2000.', 'In nineteen hundred and two thousand.'),
    ('Seat 14C.', 'Seat fourteen C.'),
    ('Ticket #42.', 'Ticket number forty-two.'),
    ('Salt & pepper.', 'Salt and pepper.'),
    ('It costs 30 USD.', 'It costs thirty dollars.'),
    ('Save 20%-30% today.', 'Save twenty percent to thirty percent today.'),
    ('Sept. 9', 'September ninth'),
    ('The plane landed at 6:45 PM.', 'The plane landed at six forty-five P M.'),
    ('Train 2 leaves at 14:05.', 'Train two leaves at fourteen oh five.'),
    ('Mr. and Mrs. Jones', 'Mister and Missus Jones'),
    ('apples, pears, etc.', 'apples, pears, et cetera.'),
    ('Jan. 1st', 'January first'),
    ('Meet at 12:00.', "Meet at twelve o'clock."),
    ('He ran 26.2 miles.', 'He ran twenty-six point two miles.'),
    ('Battery at 100%.', 'Battery at one hundred percent.'),
    ('Back in 10 min.', 'Back in ten minutes.'),
    ('Lunch 12pm - 1pm.', 'Lunch twelve P M to one P M.'),
    ('St. Louis', 'Saint Louis'),
]


@pytest.mark.parametrize("written, spoken", GOLDEN)
def test_reads_like_a_person(written, spoken):
    assert normalize_en(written) == spoken


def test_table_is_wide():
    assert len(GOLDEN) >= 40


def test_idempotent_on_spoken_text():
    for _, spoken in GOLDEN:
        assert normalize_en(spoken) == spoken
