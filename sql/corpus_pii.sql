-- `quarry corpus report`: personal data and secrets by kind (counts) and the chunks holding each.
SELECT kind, total, chunks FROM (
    SELECT 'email' AS kind, sum(pii_email) AS total, count(*) FILTER (WHERE pii_email > 0) AS chunks, 1 AS o FROM chunks
    UNION ALL SELECT 'phone', sum(pii_phone), count(*) FILTER (WHERE pii_phone > 0), 2 FROM chunks
    UNION ALL SELECT 'card', sum(pii_card), count(*) FILTER (WHERE pii_card > 0), 3 FROM chunks
    UNION ALL SELECT 'iban', sum(pii_iban), count(*) FILTER (WHERE pii_iban > 0), 4 FROM chunks
    UNION ALL SELECT 'national_id', sum(pii_national_id), count(*) FILTER (WHERE pii_national_id > 0), 5 FROM chunks
    UNION ALL SELECT 'secret', sum(pii_secret), count(*) FILTER (WHERE pii_secret > 0), 6 FROM chunks
) ORDER BY o;
